//! Output files a command writes for a person (`approve --out`): never inside the source
//! repository, never over an existing file unless asked, private (0600), and atomic — the bytes
//! go to a fresh temporary file in the same directory, are fsynced, and only then take the final
//! name, so a failure leaves nothing behind and a reader never sees half a file.

use std::io::Write as _;
use std::path::Path;

use super::outcome::CommandError;
use cap_fs_ext::{FollowSymlinks, MetadataExt as _, OpenOptionsFollowExt as _};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt as _};

/// Most `..` steps taken from an output directory towards `/` (far beyond any real depth).
const MAX_ANCESTORS: usize = 4096;

/// A directory's identity on its file system.
type DirId = (u64, u64);

fn unwritable(flag: &'static str, e: &std::io::Error) -> CommandError {
    CommandError::OutputWrite {
        flag,
        kind: e.kind(),
    }
}

/// The directory an output path is written into (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The identity of the directory `path` resolves to (links followed, as a write would).
pub(crate) fn dir_id(path: &Path) -> std::io::Result<DirId> {
    let meta = std::fs::metadata(path)?;
    Ok((
        std::os::unix::fs::MetadataExt::dev(&meta),
        std::os::unix::fs::MetadataExt::ino(&meta),
    ))
}

/// True when `dir`, or any directory above it, is one of `roots`. The walk follows the kernel's
/// own `..` from the resolved directory, so links and `..` in the spelling cannot hide a root.
fn inside_any(dir: &Path, roots: &[DirId]) -> std::io::Result<bool> {
    let mut current = dir.to_path_buf();
    let mut id = dir_id(&current)?;
    for _ in 0..MAX_ANCESTORS {
        if roots.contains(&id) {
            return Ok(true);
        }
        current.push("..");
        let up = dir_id(&current)?;
        if up == id {
            return Ok(false);
        }
        id = up;
    }
    Ok(false)
}

/// Checks an output location before any work is done: its directory exists and is writable in
/// principle, it is not inside any of `forbidden` (the repository's work tree and git directory),
/// and the file does not exist unless `force`.
///
/// # Errors
/// `PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY`, `PATCH_CANDIDATE_OUTPUT_EXISTS`, or
/// `PATCH_CANDIDATE_OUTPUT_WRITE` when the directory cannot be inspected.
pub(crate) fn check_output(
    flag: &'static str,
    path: &Path,
    forbidden: &[DirId],
    force: bool,
) -> Result<(), CommandError> {
    let parent = parent_of(path);
    if inside_any(parent, forbidden).map_err(|e| unwritable(flag, &e))? {
        return Err(CommandError::OutputInRepository { flag });
    }
    if !force && path.symlink_metadata().is_ok() {
        return Err(CommandError::OutputExists { flag });
    }
    Ok(())
}

/// Writes `bytes` to `path` (mode 0600) atomically after [`check_output`]'s checks, which are
/// repeated on the opened directory: a name that appeared since is still refused without
/// `force`, and a directory swapped for one inside the repository is refused.
///
/// # Errors
/// As [`check_output`]; `PATCH_CANDIDATE_OUTPUT_WRITE` when the file cannot be created,
/// written or named. The temporary file is removed on every failure.
pub(crate) fn write_private(
    flag: &'static str,
    path: &Path,
    bytes: &[u8],
    forbidden: &[DirId],
    force: bool,
) -> Result<(), CommandError> {
    check_output(flag, path, forbidden, force)?;
    let parent = parent_of(path);
    let name = path.file_name().ok_or(CommandError::OutputWrite {
        flag,
        kind: std::io::ErrorKind::InvalidInput,
    })?;
    let dir = Dir::open_ambient_dir(parent, cap_std::ambient_authority())
        .map_err(|e| unwritable(flag, &e))?;
    let meta = dir.dir_metadata().map_err(|e| unwritable(flag, &e))?;
    if forbidden.contains(&(meta.dev(), meta.ino()))
        || inside_any(parent, forbidden).map_err(|e| unwritable(flag, &e))?
    {
        return Err(CommandError::OutputInRepository { flag });
    }
    let temp = format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy().chars().take(64).collect::<String>(),
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .mode(0o600)
        .follow(FollowSymlinks::No);
    let written = (|| {
        let mut file = dir.open_with(&temp, &options)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = dir.remove_file(&temp);
        return Err(unwritable(flag, &e));
    }
    let named = if force {
        dir.rename(&temp, &dir, name)
    } else {
        // `link` refuses an existing name, which `rename` would silently replace.
        dir.hard_link(&temp, &dir, name)
    };
    let removed = if force && named.is_ok() {
        Ok(())
    } else {
        dir.remove_file(&temp)
    };
    match named {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(CommandError::OutputExists { flag });
        }
        Err(e) => return Err(unwritable(flag, &e)),
    }
    removed.map_err(|e| unwritable(flag, &e))?;
    dir.open(".")
        .and_then(|d| d.sync_all())
        .map_err(|e| unwritable(flag, &e))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// The names of the entries of `dir`, sorted.
    pub(crate) fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_private_files_atomically_and_never_over_an_existing_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.json");
        write_private("--out", &out, b"one", &[], false).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"one");
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let e = write_private("--out", &out, b"two", &[], false).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_OUTPUT_EXISTS");
        assert_eq!(std::fs::read(&out).unwrap(), b"one");
        write_private("--out", &out, b"two", &[], true).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"two");
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(names(dir.path()), ["a.json"], "no temporary file left");
    }

    #[test]
    fn refuses_outputs_inside_a_forbidden_directory_however_spelled() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        std::fs::create_dir(repo.join("sub")).unwrap();
        std::os::unix::fs::symlink(repo.join("sub"), root.path().join("link")).unwrap();
        let ids = [dir_id(&repo).unwrap()];
        for out in [
            repo.join("a.json"),
            repo.join("sub/a.json"),
            root.path().join("link/a.json"),
            repo.join("sub/../a.json"),
        ] {
            let e = write_private("--out", &out, b"x", &ids, true).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY", "{out:?}");
        }
        assert_eq!(names(&repo), ["sub"]);
        assert!(names(&repo.join("sub")).is_empty());
        write_private("--out", &root.path().join("a.json"), b"x", &ids, false).unwrap();
    }

    #[test]
    fn a_directory_at_the_name_is_refused_and_nothing_is_left() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a.json")).unwrap();
        let out = dir.path().join("a.json");
        let e = write_private("--out", &out, b"x", &[], false).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_OUTPUT_EXISTS");
        let e = write_private("--out", &out, b"x", &[], true).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_OUTPUT_WRITE");
        assert_eq!(names(dir.path()), ["a.json"]);
    }
}
