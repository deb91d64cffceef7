//! Paths a person names on the command line. One rule for every flag of every command: a named
//! path that does not exist is a usage error (exit 2, `PATCH_CANDIDATE_PATH_MISSING`), a path of
//! the wrong kind likewise (`PATCH_CANDIDATE_PATH_KIND`); files are read once through
//! [`turn::read_bounded_file`] (opened without blocking, checked on the handle, byte-capped).
//!
//! The Docker socket is the one exception: a missing socket means the daemon is not running, an
//! environment failure (`REPOSITORY_DOCKER_UNAVAILABLE`, exit 3).

use std::path::Path;

use turn::BoundedReadError;

use super::CliError;
use super::outcome::{INPUT_CODE, IO_CODE};

/// The file `path` named by `flag`, at most `limit` bytes.
pub(crate) fn read_file(flag: &str, path: &Path, limit: usize) -> Result<Vec<u8>, CliError> {
    turn::read_bounded_file(path, limit).map_err(|e| read_error(flag, path, &e))
}

/// The CLI error for a failed bounded read of the file `flag` names.
pub(crate) fn read_error(flag: &str, path: &Path, e: &BoundedReadError) -> CliError {
    match e {
        BoundedReadError::Missing => CliError::missing_path(flag, path),
        BoundedReadError::NotRegular => CliError::path_kind(flag, path, "a regular file"),
        BoundedReadError::TooLarge { limit } => {
            CliError::rejected(INPUT_CODE, format!("{flag} file exceeds {limit} bytes"))
        }
        BoundedReadError::Io { kind } => {
            CliError::environment(IO_CODE, format!("cannot read the {flag} file: {kind}"))
        }
        _ => CliError::environment(IO_CODE, format!("cannot read the {flag} file")),
    }
}

/// The file `flag` names, as UTF-8 text.
pub(crate) fn read_text(flag: &str, path: &Path, limit: usize) -> Result<String, CliError> {
    String::from_utf8(read_file(flag, path, limit)?)
        .map_err(|_| CliError::rejected(INPUT_CODE, format!("the {flag} file is not UTF-8")))
}

fn metadata(flag: &str, path: &Path) -> Result<std::fs::Metadata, CliError> {
    std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
            CliError::missing_path(flag, path)
        }
        kind => CliError::environment(IO_CODE, format!("cannot inspect the {flag} path: {kind}")),
    })
}

/// `flag` names an existing directory.
pub(crate) fn require_dir(flag: &str, path: &Path) -> Result<(), CliError> {
    if metadata(flag, path)?.is_dir() {
        Ok(())
    } else {
        Err(CliError::path_kind(flag, path, "a directory"))
    }
}

/// `flag` names an output location: the path itself may be new, its parent directory must exist.
pub(crate) fn require_parent(flag: &str, path: &Path) -> Result<(), CliError> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            if metadata(flag, parent)?.is_dir() {
                Ok(())
            } else {
                Err(CliError::path_kind(flag, parent, "a directory"))
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use vocab::FailureClass;

    use super::*;

    #[test]
    fn missing_paths_are_usage_errors_with_one_code() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        for e in [
            read_file("--approval", &missing, 10).unwrap_err(),
            require_dir("--staged", &missing).unwrap_err(),
            require_parent("--out", &missing.join("x.zip")).unwrap_err(),
            require_dir("--repo", &file.join("below")).unwrap_err(),
        ] {
            assert_eq!(
                (e.code, e.class),
                ("PATCH_CANDIDATE_PATH_MISSING", FailureClass::Usage)
            );
        }
        let e = require_dir("--staged", &file).unwrap_err();
        assert_eq!(
            (e.code, e.class),
            ("PATCH_CANDIDATE_PATH_KIND", FailureClass::Usage)
        );
        let e = read_file("--approval", dir.path(), 10).unwrap_err();
        assert_eq!(
            (e.code, e.class),
            ("PATCH_CANDIDATE_PATH_KIND", FailureClass::Usage)
        );
        require_parent("--out", Path::new("relative.zip")).unwrap();
    }
}
