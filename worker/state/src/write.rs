//! Writing the state directory's files: atomically (a temp file, fsync, rename), never through
//! a symbolic link, private (0600) for the records written by name.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptions};

use crate::create::{OpenDirError, open_or_create_dir};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Which step of an atomic write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The folder could not be created.
    #[error("the folder cannot be created")]
    CreateDir,
    /// The folder could not be opened.
    #[error("the folder cannot be opened")]
    OpenDir,
    /// The temp file could not be created.
    #[error("the file cannot be created")]
    Create,
    /// The temp file could not be written or synced.
    #[error("the file cannot be written")]
    Write,
    /// The temp file could not be renamed over the file.
    #[error("the file cannot be renamed")]
    Rename,
}

/// Writes `bytes` to `<dir>/<name>` atomically as a 0600 file, `dir` created 0700 when missing
/// (its parent must exist): the state directory's records written by name (the gate image
/// records of `image approve --gate`).
///
/// # Errors
/// [`WriteError`].
pub fn write_private_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), WriteError> {
    let handle = open_or_create_dir(dir).map_err(|e| match e {
        OpenDirError::Create => WriteError::CreateDir,
        OpenDirError::Open => WriteError::OpenDir,
    })?;
    write_atomic(&handle, name, bytes, Some(0o600))
}

/// Writes `bytes` to `name` in `dir` atomically: a fresh temp file (created exclusively, never
/// through a link, with `mode` or the default), fsync, rename over `name`. The temp file is
/// removed when a step fails.
///
/// # Errors
/// [`WriteError`].
pub fn write_atomic(
    dir: &Dir,
    name: &str,
    bytes: &[u8],
    mode: Option<u32>,
) -> Result<(), WriteError> {
    use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt as _};
    use cap_std::fs::OpenOptionsExt as _;
    let temp = format!(
        ".tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .follow(FollowSymlinks::No);
    if let Some(mode) = mode {
        options.mode(mode);
    }
    let written = (|| {
        let mut file = dir
            .open_with(&temp, &options)
            .map_err(|_| WriteError::Create)?;
        file.write_all(bytes).map_err(|_| WriteError::Write)?;
        file.sync_all().map_err(|_| WriteError::Write)
    })();
    let renamed =
        written.and_then(|()| dir.rename(&temp, dir, name).map_err(|_| WriteError::Rename));
    if renamed.is_err() {
        let _ = dir.remove_file(&temp);
    }
    renamed
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn private_records_replace_atomically() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        write_private_atomic(&state, "r.json", b"one").unwrap();
        write_private_atomic(&state, "r.json", b"two").unwrap();
        let path = state.join("r.json");
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&state), 0o700);
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 1);
        assert_eq!(
            write_private_atomic(&tmp.path().join("a/b"), "r.json", b"x"),
            Err(WriteError::CreateDir)
        );
    }
}
