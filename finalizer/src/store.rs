//! A content-addressed candidate store: one `<hex digest>.json` per candidate in one directory.
//!
//! Writes are atomic and never clobber: the JSON goes to a fresh temporary file in the same
//! directory (0600, `create_new`), is fsynced, then hard-linked to its final name (`link` fails if
//! the name exists, which `rename` would silently replace), the temporary name is removed and the
//! directory fsynced. Reads re-validate the document and recompute the digest. All access goes
//! through one `cap_std::fs::Dir` handle without following symlinks.
//!
//! Without the crate's `effects` feature only the read side exists ([`CandidateStore::open_existing`],
//! [`CandidateStore::list`], [`CandidateStore::get`]): nothing can create or write a file.

use std::io::Read as _;
#[cfg(feature = "effects")]
use std::io::Write as _;
use std::path::Path;
#[cfg(feature = "effects")]
use std::sync::atomic::{AtomicU64, Ordering};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt as _};
use cap_std::fs::OpenOptionsExt as _;
use cap_std::fs::{Dir, OpenOptions};
use vocab::Sha256;

use crate::digest::repository_patch_digest;
use crate::error::FinalizeError;
use crate::model::{MAX_CANDIDATE_JSON_BYTES, RepositoryPatchCandidate, validate_candidate_json};

#[cfg(feature = "effects")]
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// An opened candidate store directory.
#[derive(Debug)]
pub struct CandidateStore {
    dir: Dir,
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> FinalizeError + '_ {
    move |e| FinalizeError::StoreIo {
        detail: format!("{what}: {}", e.kind()),
    }
}

/// Why [`open_dir_nofollow`] failed.
#[derive(Debug)]
enum OpenDirError {
    Missing,
    /// A link or a non-directory.
    NotDirectory,
    Io(std::io::Error),
}

impl OpenDirError {
    fn into_store_error(self) -> FinalizeError {
        match self {
            Self::Missing => FinalizeError::StoreIo {
                detail: "open store directory: not found".into(),
            },
            Self::NotDirectory => FinalizeError::StoreIo {
                detail: "store path is not a directory".into(),
            },
            Self::Io(e) => io_err("open store directory")(e),
        }
    }
}

/// `open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`, then `fstat` on the handle.
fn open_dir_nofollow(path: &Path) -> Result<Dir, OpenDirError> {
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::NOENT => OpenDirError::Missing,
        Errno::LOOP | Errno::NOTDIR => OpenDirError::NotDirectory,
        e => OpenDirError::Io(e.into()),
    })?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(OpenDirError::Io)?;
    if !meta.is_dir() {
        return Err(OpenDirError::NotDirectory);
    }
    Ok(Dir::from_std_file(file))
}

fn file_name(digest: &Sha256) -> String {
    format!("{}.json", digest.bare_hex())
}

impl CandidateStore {
    /// Opens `dir`, creating it (mode 0700, parent must exist) when missing. A symlink or a
    /// non-directory at `dir` is refused by the open itself (see [`Self::open_existing`]).
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_STORE_IO` when the directory cannot be created or opened.
    #[cfg(feature = "effects")]
    pub fn open(dir: &Path) -> Result<Self, FinalizeError> {
        match open_dir_nofollow(dir) {
            Ok(handle) => Ok(Self { dir: handle }),
            Err(OpenDirError::Missing) => {
                use std::os::unix::fs::DirBuilderExt as _;
                match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                    Ok(()) => {}
                    // Created concurrently: the open below checks what is there.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_err("create store directory")(e)),
                }
                match open_dir_nofollow(dir) {
                    Ok(handle) => Ok(Self { dir: handle }),
                    Err(e) => Err(e.into_store_error()),
                }
            }
            Err(e) => Err(e.into_store_error()),
        }
    }

    /// Opens an existing store directory without ever creating anything (for read-only
    /// consumers such as the MCP server). Open first, then check on the handle:
    /// `O_NOFOLLOW | O_DIRECTORY` refuses a symlink or a non-directory at `dir` atomically.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_STORE_MISSING` when `dir` is not an existing directory (or is a link);
    /// `REPOSITORY_PATCH_STORE_IO` when it cannot be opened.
    pub fn open_existing(dir: &Path) -> Result<Self, FinalizeError> {
        match open_dir_nofollow(dir) {
            Ok(handle) => Ok(Self { dir: handle }),
            Err(OpenDirError::Missing | OpenDirError::NotDirectory) => {
                Err(FinalizeError::StoreMissing {
                    digest: "store directory".to_owned(),
                })
            }
            Err(e) => Err(e.into_store_error()),
        }
    }

    /// Stores `candidate` under its digest and returns the digest. Storing the same candidate
    /// again is a no-op.
    ///
    /// # Errors
    /// Digest errors of the candidate; `REPOSITORY_PATCH_STORE_CONFLICT` when the name holds
    /// different bytes; `REPOSITORY_PATCH_STORE_IO` on I/O failure.
    #[cfg(feature = "effects")]
    pub fn put(&self, candidate: &RepositoryPatchCandidate) -> Result<Sha256, FinalizeError> {
        let digest = repository_patch_digest(candidate)?;
        let bytes = candidate.to_json_pretty()?;
        let name = file_name(&digest);
        if self.exists(&name)? {
            return self.confirm_same(&name, &bytes, &digest);
        }
        let temp = format!(
            ".tmp-{}-{}-{}",
            digest.bare_hex().get(..16).unwrap_or(""),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut options = OpenOptions::new();
        options
            .write(true)
            .create_new(true)
            .mode(0o600)
            .follow(FollowSymlinks::No);
        let written = (|| {
            let mut file = self
                .dir
                .open_with(&temp, &options)
                .map_err(io_err("create temp file"))?;
            file.write_all(&bytes).map_err(io_err("write candidate"))?;
            file.sync_all().map_err(io_err("fsync candidate"))?;
            Ok::<(), FinalizeError>(())
        })();
        let linked = written.and_then(|()| match self.dir.hard_link(&temp, &self.dir, &name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_err("link candidate")(e)),
        });
        let removed = self.dir.remove_file(&temp);
        let linked = linked?;
        removed.map_err(io_err("remove temp file"))?;
        self.sync_dir()?;
        if linked {
            Ok(digest)
        } else {
            self.confirm_same(&name, &bytes, &digest)
        }
    }

    /// The digests of every stored candidate, sorted. Other files are ignored.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_STORE_IO` when the directory cannot be listed.
    pub fn list(&self) -> Result<Vec<Sha256>, FinalizeError> {
        let mut out = Vec::new();
        for entry in self.dir.entries().map_err(io_err("list store"))? {
            let entry = entry.map_err(io_err("list store"))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(hex) = name.strip_suffix(".json") else {
                continue;
            };
            if let Ok(digest) = Sha256::from_bare_hex(hex) {
                out.push(digest);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Reads the candidate filed under `digest`, re-validates it and checks its digest.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_STORE_MISSING`, `REPOSITORY_PATCH_STORE_DIGEST` (content no longer
    /// matches its name), candidate validation errors, `REPOSITORY_PATCH_STORE_IO`.
    pub fn get(&self, digest: &Sha256) -> Result<RepositoryPatchCandidate, FinalizeError> {
        let name = file_name(digest);
        if !self.exists(&name)? {
            return Err(FinalizeError::StoreMissing {
                digest: digest.to_string(),
            });
        }
        let bytes = self.read_bounded(&name)?;
        let candidate = validate_candidate_json(&bytes)?;
        if repository_patch_digest(&candidate)? != *digest {
            return Err(FinalizeError::StoreDigest {
                digest: digest.to_string(),
            });
        }
        Ok(candidate)
    }

    fn exists(&self, name: &str) -> Result<bool, FinalizeError> {
        match self.dir.symlink_metadata(name) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err("inspect candidate")(e)),
        }
    }

    /// Reads the candidate file `name`: opened without following links and without blocking
    /// (a FIFO planted in the store cannot stall a reader), checked on the handle (regular file,
    /// size within the candidate limit), and read with a cap.
    fn read_bounded(&self, name: &str) -> Result<Vec<u8>, FinalizeError> {
        let nonblock = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
        let mut options = OpenOptions::new();
        options
            .read(true)
            .follow(FollowSymlinks::No)
            .custom_flags(nonblock);
        let file = self
            .dir
            .open_with(name, &options)
            .map_err(io_err("open candidate"))?;
        let meta = file.metadata().map_err(io_err("inspect candidate"))?;
        if !meta.is_file() {
            return Err(FinalizeError::StoreIo {
                detail: "stored candidate is not a regular file".into(),
            });
        }
        let limit = u64::try_from(MAX_CANDIDATE_JSON_BYTES).unwrap_or(u64::MAX);
        if meta.len() > limit {
            return Err(FinalizeError::input(
                "candidate document exceeds size limit",
            ));
        }
        let mut bytes = Vec::new();
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err("read candidate"))?;
        if bytes.len() > MAX_CANDIDATE_JSON_BYTES {
            return Err(FinalizeError::input(
                "candidate document exceeds size limit",
            ));
        }
        Ok(bytes)
    }

    #[cfg(feature = "effects")]
    fn confirm_same(
        &self,
        name: &str,
        bytes: &[u8],
        digest: &Sha256,
    ) -> Result<Sha256, FinalizeError> {
        let existing = self.read_bounded(name)?;
        if existing == bytes {
            Ok(*digest)
        } else {
            Err(FinalizeError::StoreConflict {
                digest: digest.to_string(),
            })
        }
    }

    #[cfg(feature = "effects")]
    fn sync_dir(&self) -> Result<(), FinalizeError> {
        // The `Dir` handle itself is `O_PATH`; fsync needs a readable descriptor of the directory.
        let mut options = OpenOptions::new();
        options.read(true).follow(FollowSymlinks::No);
        let handle = self
            .dir
            .open_with(".", &options)
            .map_err(io_err("open store directory"))?;
        handle.sync_all().map_err(io_err("fsync store directory"))
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
