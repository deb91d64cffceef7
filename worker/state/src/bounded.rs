//! Files read with a byte cap (a person's named files: approval, snapshot evidence, proposal,
//! candidate, policy, `images.json`; the state directory's records): opened once, checked on the
//! handle, read with a byte cap.
//!
//! # Security
//! The file is opened with `O_NONBLOCK`, so a FIFO swapped in for the file never blocks the open;
//! its type and size are then read from the open handle (`fstat`), never from the path, so a swap
//! between a check and the open changes nothing; the read itself stops at `limit + 1` bytes, so a
//! file that grows after the check is still refused. A link the user named is followed: it is the
//! user's own choice of file.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Why a named file could not be read. Never carries the file's contents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BoundedReadError {
    /// The path (or one of its parents) does not exist.
    #[error("does not exist")]
    Missing,
    /// The path names a directory, FIFO, socket or device.
    #[error("is not a regular file")]
    NotRegular,
    /// The file holds more than the cap.
    #[error("exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// Opening or reading failed otherwise (permissions, I/O).
    #[error("cannot be read ({kind})")]
    Io { kind: std::io::ErrorKind },
}

fn io_error(e: &std::io::Error) -> BoundedReadError {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
            BoundedReadError::Missing
        }
        kind => BoundedReadError::Io { kind },
    }
}

/// Opens `path` without blocking and returns the handle once `fstat` shows a regular file of at
/// most `limit` bytes.
///
/// # Errors
/// See [`BoundedReadError`].
pub fn open_regular_file(path: &Path, limit: usize) -> Result<(File, u64), BoundedReadError> {
    let nonblock = rustix::fs::OFlags::NONBLOCK.bits();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(nonblock).unwrap_or(0))
        .open(path)
        .map_err(|e| io_error(&e))?;
    let meta = file.metadata().map_err(|e| io_error(&e))?;
    if !meta.file_type().is_file() {
        return Err(BoundedReadError::NotRegular);
    }
    if meta.len() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(BoundedReadError::TooLarge { limit });
    }
    Ok((file, meta.len()))
}

/// Reads the regular file `path`, refusing it when it holds more than `limit` bytes.
///
/// # Errors
/// See [`BoundedReadError`].
pub fn read_bounded_file(path: &Path, limit: usize) -> Result<Vec<u8>, BoundedReadError> {
    let (file, len) = open_regular_file(path, limit)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&e))?;
    if bytes.len() > limit {
        return Err(BoundedReadError::TooLarge { limit });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_only_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read_bounded_file(&file, 5).unwrap(), b"12345");
        assert_eq!(
            read_bounded_file(&file, 4),
            Err(BoundedReadError::TooLarge { limit: 4 })
        );
        assert_eq!(
            read_bounded_file(&dir.path().join("missing"), 5),
            Err(BoundedReadError::Missing)
        );
        assert_eq!(
            read_bounded_file(&file.join("below-a-file"), 5),
            Err(BoundedReadError::Missing)
        );
        assert_eq!(
            read_bounded_file(dir.path(), 5),
            Err(BoundedReadError::NotRegular)
        );
    }

    /// A FIFO (nobody writing) is refused at once instead of blocking the open or the read.
    #[test]
    fn r_fifo_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("approval.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(
            read_bounded_file(&fifo, 1024),
            Err(BoundedReadError::NotRegular)
        );
        assert_eq!(
            read_bounded_file(Path::new("/dev/zero"), 1024),
            Err(BoundedReadError::NotRegular)
        );
    }
}
