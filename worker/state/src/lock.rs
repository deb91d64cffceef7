//! The exclusive lock of a state directory file (`serve.lock`: one `serve` per state directory).

use std::path::Path;

/// Why `lock_exclusive` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock file could not be opened (or created).
    #[error("the lock file cannot be opened")]
    Open,
    /// Another process holds the lock.
    #[error("the lock is held")]
    Held,
}

/// Opens (creating 0600, never truncating) the lock file `path` and takes an exclusive,
/// non-blocking `flock` on it, held while the returned file is open.
///
/// # Errors
/// [`LockError`].
pub fn lock_exclusive(path: &Path) -> Result<std::fs::File, LockError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|_| LockError::Open)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(|_| LockError::Held)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("serve.lock");
        let held = lock_exclusive(&path).unwrap();
        assert_eq!(lock_exclusive(&path).unwrap_err(), LockError::Held);
        drop(held);
        lock_exclusive(&path).unwrap();
        assert_eq!(
            lock_exclusive(&tmp.path().join("missing/serve.lock")).unwrap_err(),
            LockError::Open
        );
    }
}
