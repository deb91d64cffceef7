//! Creating the state directory's folders, private (0700), for the directory handle and the
//! writers alike.

use std::path::Path;

use cap_std::fs::Dir;

/// Creates `dir` (and its parents) with mode 0700 when missing: the state directory and its
/// folders. The state directory is the operator's: ambient by design.
///
/// # Errors
/// The I/O error of the creation.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Why [`open_or_create_dir`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenDirError {
    /// The folder could not be created.
    #[error("cannot be created")]
    Create,
    /// The folder could not be opened.
    #[error("cannot be opened")]
    Open,
}

/// Creates `dir` 0700 when missing (its parent must exist: no parents are created) and opens it
/// as a handle.
///
/// # Errors
/// [`OpenDirError`].
pub fn open_or_create_dir(dir: &Path) -> Result<Dir, OpenDirError> {
    use std::os::unix::fs::DirBuilderExt as _;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return Err(OpenDirError::Create),
    }
    Dir::open_ambient_dir(dir, cap_std::ambient_authority()).map_err(|_| OpenDirError::Open)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn one_level_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let one = tmp.path().join("one");
        open_or_create_dir(&one).unwrap();
        open_or_create_dir(&one).unwrap();
        assert_eq!(mode(&one), 0o700);
        assert_eq!(
            open_or_create_dir(&tmp.path().join("missing/two")).unwrap_err(),
            OpenDirError::Create
        );
    }
}
