//! Where the state directory is, and creating and opening it (and its folders) private.

use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use crate::create::create_private_dir;
use crate::entries::Entry;
use crate::error::StateError;
use crate::lock::{LockError, lock_exclusive};
use crate::write::{WriteError, write_private_atomic};

/// The variable that names the state directory.
pub const STATE_DIR_ENV: &str = "PATCH_CANDIDATE_STATE_DIR";
/// The state directory under `$HOME` when [`STATE_DIR_ENV`] is unset or empty.
pub const HOME_SUFFIX: &str = ".local/state/patch-candidate";

/// The operator's state directory (image records, usage ledger, candidates, host ids, the job
/// store, the service's files): a path, created and opened on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// `${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_STATE` when neither variable is set.
    pub fn locate() -> Result<Self, StateError> {
        if let Some(dir) = std::env::var_os(STATE_DIR_ENV).filter(|d| !d.is_empty()) {
            return Ok(Self::at(PathBuf::from(dir)));
        }
        let home =
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .ok_or(StateError::Unusable {
                    detail: "HOME is not set",
                })?;
        Ok(Self::at(PathBuf::from(home).join(HOME_SUFFIX)))
    }

    /// The state directory at `root` (a test's or an operator's explicit choice).
    #[must_use]
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The directory's path, owned.
    #[must_use]
    pub fn into_path(self) -> PathBuf {
        self.root
    }

    /// The path of one of its entries.
    #[must_use]
    pub fn entry(&self, entry: &Entry) -> PathBuf {
        entry.path_in(&self.root)
    }

    /// Creates the directory (and its parents) 0700 when missing.
    ///
    /// # Errors
    /// The I/O error of the creation.
    pub fn create_private(&self) -> std::io::Result<()> {
        create_private_dir(&self.root)
    }

    /// Creates the directory 0700 when missing and opens it as a handle.
    ///
    /// # Errors
    /// The I/O error of the creation or the open.
    pub fn open(&self) -> std::io::Result<Dir> {
        self.create_private()?;
        Dir::open_ambient_dir(&self.root, cap_std::ambient_authority())
    }

    /// Writes the record `entry` atomically as a 0600 file, the directory created 0700 when
    /// missing (its parent must exist).
    ///
    /// # Errors
    /// [`WriteError`].
    pub fn write_private(&self, entry: &Entry, bytes: &[u8]) -> Result<(), WriteError> {
        write_private_atomic(&self.root, entry.name, bytes)
    }

    /// Takes `serve.lock` (`crate::entries::SERVE_LOCK`): one `serve` per state directory, for as long
    /// as the returned file is open.
    ///
    /// # Errors
    /// [`LockError`].
    pub fn lock_serve(&self) -> Result<std::fs::File, LockError> {
        lock_exclusive(&self.entry(&crate::entries::SERVE_LOCK))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn created_private_with_parents_and_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().join("a/b"));
        let dir = state.open().unwrap();
        assert_eq!(mode(state.path()), 0o700);
        dir.create_dir("x").unwrap();
        // Creating it again is no error.
        state.create_private().unwrap();
        assert_eq!(
            state.entry(&crate::CANDIDATES),
            tmp.path().join("a/b/candidates")
        );
    }
}
