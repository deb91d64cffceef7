//! What the workspace is at a given moment, without running anything: the Git revision (HEAD
//! read as files through read-only directory handles: `HEAD`, loose refs, `packed-refs`; no
//! subprocess, no Git library) and a bounded fingerprint of the tree (names, sizes and
//! modification times of the files outside the skip list). Both are taken at bind time and on
//! every call, so each response can say whether the workspace changed since the server bound it.
//! (Tested through the tools in `tests/mcp/upstream.rs`: this source must not name writing APIs.)

use std::io::Read as _;

use cap_std::fs::Dir;
use schemars::JsonSchema;
use serde::Serialize;

use crate::layout::is_skipped_dir;

/// Largest Git metadata file read (`HEAD`, one loose ref).
const MAX_REF_BYTES: u64 = 4096;
/// Largest `packed-refs` read.
const MAX_PACKED_REFS_BYTES: u64 = 4 * 1024 * 1024;
/// Most directory entries the fingerprint visits; beyond it the change check says "unknown".
pub const MAX_FINGERPRINT_ENTRIES: usize = 10_000;
/// Deepest directory the fingerprint descends into.
const MAX_FINGERPRINT_DEPTH: usize = 64;

/// The workspace revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Revision {
    /// `git` when the root has a `.git`, else `none`.
    pub kind: String,
    /// The symbolic ref HEAD points to (`refs/heads/main`), if any.
    pub head_ref: Option<String>,
    /// The commit HEAD resolves to (hex), when it could be read.
    pub commit: Option<String>,
}

impl Revision {
    fn none() -> Self {
        Self {
            kind: "none".to_owned(),
            head_ref: None,
            commit: None,
        }
    }
}

/// Handles on the Git directories, opened once at bind.
#[derive(Debug)]
pub struct GitDirs {
    /// The per-worktree Git directory (holds `HEAD`).
    git: Dir,
    /// The common directory (holds `refs/`, `packed-refs`); `None` when it is `git` itself.
    common: Option<Dir>,
}

impl GitDirs {
    /// Opens `.git` under the root: a directory, or a `gitdir:` file (a linked worktree), whose
    /// target and `commondir` are opened read-only here, once.
    ///
    /// # Security
    /// Only reads; the `gitdir:` target is operator-chosen repository metadata, opened at startup
    /// next to the root the operator bound.
    #[must_use]
    pub fn open(root_dir: &Dir, root: &std::path::Path) -> Option<Self> {
        let meta = root_dir.symlink_metadata(".git").ok()?;
        if meta.is_dir() {
            let git = root_dir.open_dir(".git").ok()?;
            let common = open_common(&git, &root.join(".git"));
            return Some(Self { git, common });
        }
        if !meta.is_file() {
            return None;
        }
        let text = read_small(root_dir, ".git", MAX_REF_BYTES)?;
        let target = text.strip_prefix("gitdir:")?.trim();
        if target.is_empty() || target.contains('\0') {
            return None;
        }
        let path = root.join(target);
        let git = Dir::open_ambient_dir(&path, cap_std::ambient_authority()).ok()?;
        let common = open_common(&git, &path);
        Some(Self { git, common })
    }

    fn refs(&self) -> &Dir {
        self.common.as_ref().unwrap_or(&self.git)
    }

    /// Reads HEAD and resolves it (one level of symbolic ref, loose then packed).
    #[must_use]
    pub fn revision(&self) -> Revision {
        let mut revision = Revision {
            kind: "git".to_owned(),
            head_ref: None,
            commit: None,
        };
        let Some(head) = read_small(&self.git, "HEAD", MAX_REF_BYTES) else {
            return revision;
        };
        let head = head.trim_end_matches(['\n', '\r']);
        if let Some(target) = head.strip_prefix("ref: ") {
            let target = target.trim();
            if !valid_ref_name(target) {
                return revision;
            }
            revision.head_ref = Some(target.to_owned());
            revision.commit = read_small(&self.git, target, MAX_REF_BYTES)
                .or_else(|| read_small(self.refs(), target, MAX_REF_BYTES))
                .map(|t| t.trim().to_owned())
                .filter(|t| is_object_id(t))
                .or_else(|| self.packed(target));
        } else if is_object_id(head) {
            revision.commit = Some(head.to_owned());
        }
        revision
    }

    fn packed(&self, target: &str) -> Option<String> {
        let text = read_small(self.refs(), "packed-refs", MAX_PACKED_REFS_BYTES)?;
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
            .find_map(|l| {
                let (id, name) = l.split_once(' ')?;
                (name == target && is_object_id(id)).then(|| id.to_owned())
            })
    }
}

fn open_common(git: &Dir, git_path: &std::path::Path) -> Option<Dir> {
    let text = read_small(git, "commondir", MAX_REF_BYTES)?;
    let rel = text.trim();
    if rel.is_empty() || rel.contains('\0') {
        return None;
    }
    Dir::open_ambient_dir(git_path.join(rel), cap_std::ambient_authority()).ok()
}

fn read_small(dir: &Dir, path: &str, max: u64) -> Option<String> {
    let file = dir.open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let mut out = String::new();
    file.take(max).read_to_string(&mut out).ok()?;
    Some(out)
}

/// `refs/…` with portable, non-traversing segments.
fn valid_ref_name(name: &str) -> bool {
    name.starts_with("refs/")
        && name.len() <= 1024
        && snapshot::RepoPath::parse(name).is_ok()
        && !name.split('/').any(|s| s == ".." || s.starts_with('.'))
}

/// 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64)
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The revision of a workspace with or without Git.
#[must_use]
pub fn revision_of(git: Option<&GitDirs>) -> Revision {
    git.map_or_else(Revision::none, GitDirs::revision)
}

/// A digest of (path, size, mtime) of every file outside the skip list; `None` past the budget.
#[must_use]
pub fn fingerprint(root: &Dir) -> Option<String> {
    let mut hasher: Vec<u8> = Vec::new();
    let mut visited = 0usize;
    let mut stack: Vec<(String, usize)> = vec![(String::new(), 0)];
    while let Some((dir_path, depth)) = stack.pop() {
        let entries = if dir_path.is_empty() {
            root.entries().ok()?
        } else {
            root.read_dir(&dir_path).ok()?
        };
        let mut names: Vec<(String, cap_std::fs::Metadata)> = Vec::new();
        for entry in entries {
            visited += 1;
            if visited > MAX_FINGERPRINT_ENTRIES {
                return None;
            }
            let entry = entry.ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata().ok()?;
            names.push((name, meta));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, meta) in names {
            let path = if dir_path.is_empty() {
                name.clone()
            } else {
                format!("{dir_path}/{name}")
            };
            let file_type = meta.file_type();
            if file_type.is_dir() {
                if is_skipped_dir(&name) || name == ".git" || depth + 1 > MAX_FINGERPRINT_DEPTH {
                    continue;
                }
                hasher.extend_from_slice(b"d\0");
                hasher.extend_from_slice(path.as_bytes());
                hasher.extend_from_slice(b"\n");
                stack.push((path, depth + 1));
            } else {
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|m| m.into_std().duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                hasher.extend_from_slice(b"f\0");
                hasher.extend_from_slice(path.as_bytes());
                hasher.extend_from_slice(format!("\0{}\0{modified}\n", meta.len()).as_bytes());
            }
        }
    }
    Some(vocab::Sha256::of(&hasher).to_string())
}
