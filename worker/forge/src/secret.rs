//! Operator secret files: the one reader of the house (the webhook secret here; publish reads
//! its forge tokens and remote credentials with it too), and the webhook secret built from it.

use std::io::Read as _;
use std::path::Path;

use crate::error::ForgeError;

/// Largest secret file accepted.
pub const MAX_SECRET_FILE_BYTES: u64 = 4096;

fn secret_error(detail: &'static str) -> ForgeError {
    ForgeError::Secret { detail }
}

/// Reads the one line of an operator's secret file: a regular file (no link followed), readable
/// and writable by its owner only (0600 or stricter), at most 4 KiB, UTF-8, one non-empty line
/// without control characters; one trailing `\n` (or `\r\n`) is not part of the secret.
///
/// # Errors
/// `PATCH_CANDIDATE_FORGE_SECRET` for each rule broken, naming the rule, never the content.
///
/// # Security
/// The operator names the file: ambient access by design, with `O_NOFOLLOW` so a link planted in
/// its place is refused. The content is never put in an error.
pub fn read_secret_file(path: &Path) -> Result<String, ForgeError> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|_| secret_error("the secret file cannot be opened (a link is refused)"))?;
    let meta = file
        .metadata()
        .map_err(|_| secret_error("the secret file cannot be read"))?;
    if !meta.is_file() {
        return Err(secret_error("the secret file is not a regular file"));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(secret_error(
            "the secret file is readable or writable by others (use mode 0600)",
        ));
    }
    if meta.len() > MAX_SECRET_FILE_BYTES {
        return Err(secret_error("the secret file is larger than 4 KiB"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| secret_error("the secret file cannot be read"))?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(secret_error("the secret file is larger than 4 KiB"));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| secret_error("the secret file is not UTF-8 text"))?;
    let line = text.strip_suffix('\n').unwrap_or(&text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() || line.chars().any(char::is_control) {
        return Err(secret_error(
            "the secret file must hold one non-empty line without control characters",
        ));
    }
    Ok(line.to_owned())
}

/// The secret a forge signs its deliveries with (GitHub, Gitea/Forgejo: the HMAC key; GitLab: the
/// token it sends back). Built only from an operator file; its `Debug` shows no byte of it.
#[derive(Clone)]
pub struct WebhookSecret(Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl WebhookSecret {
    /// Reads the secret from the operator's file ([`read_secret_file`]'s rules).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_FORGE_SECRET` (see [`read_secret_file`]).
    ///
    /// # Security
    /// The secret is kept in memory only; it never reaches an error, a log or `Debug`.
    pub fn from_file(path: &Path) -> Result<Self, ForgeError> {
        read_secret_file(path).map(|line| Self(line.into_bytes()))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn the_secret_file_rules() {
        let dir = tempfile::tempdir().unwrap();
        let good = write(dir.path(), "good", b"s3cret-value\n", 0o600);
        let secret = WebhookSecret::from_file(&good).unwrap();
        assert_eq!(secret.bytes(), b"s3cret-value");
        assert_eq!(format!("{secret:?}"), "WebhookSecret(..)");
        let crlf = write(dir.path(), "crlf", b"abc\r\n", 0o400);
        assert_eq!(read_secret_file(&crlf).unwrap(), "abc");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let cases = [
            write(dir.path(), "open", b"abc\n", 0o644),
            write(dir.path(), "group", b"abc\n", 0o640),
            write(dir.path(), "empty", b"\n", 0o600),
            write(dir.path(), "two", b"a\nb\n", 0o600),
            write(dir.path(), "nul", b"a\0b", 0o600),
            write(dir.path(), "latin1", b"\xff\xfe", 0o600),
            write(dir.path(), "big", &[b'a'; 4097], 0o600),
            link,
            dir.path().join("absent"),
            dir.path().to_path_buf(),
        ];
        for path in cases {
            let err = WebhookSecret::from_file(&path).unwrap_err();
            assert_eq!(err.code(), "PATCH_CANDIDATE_FORGE_SECRET", "{path:?}");
            assert!(!err.to_string().contains("abc"), "{err}");
        }
        let max = write(dir.path(), "max", &[b'a'; 4096], 0o600);
        assert_eq!(read_secret_file(&max).unwrap().len(), 4096);
    }
}
