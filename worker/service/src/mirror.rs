//! The host's bare mirror cache: one `git clone --mirror` per repository locator (a local path or
//! a Git URL), fetched again only when the pinned commit is missing. Snapshots are then read from
//! the mirror's object database at the pinned commit, exactly as `run` reads a local repository.
//!
//! The mirror's directory name is the SHA-256 of the locator, so a locator never becomes a path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::ServiceError;

/// How long one clone or fetch may take.
const GIT_NETWORK_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest accepted locator.
const MAX_LOCATOR_BYTES: usize = 2048;

/// A repository locator: an absolute local path, or a `https://`, `http://`, `ssh://`, `git://`
/// or `file://` URL. No option-like, relative or control-character text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locator(String);

impl Locator {
    /// Parses a locator.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_REPOSITORY` when the text is not one of the accepted forms.
    pub fn parse(text: &str) -> Result<Self, ServiceError> {
        let bad = |detail: &'static str| ServiceError::Repository { detail };
        if text.is_empty() || text.len() > MAX_LOCATOR_BYTES {
            return Err(bad("locator length"));
        }
        if text.chars().any(char::is_control) {
            return Err(bad("control character in locator"));
        }
        let url = ["https://", "http://", "ssh://", "git://", "file://"]
            .iter()
            .any(|scheme| text.starts_with(scheme) && text.len() > scheme.len());
        if url || text.starts_with('/') {
            Ok(Self(text.to_owned()))
        } else {
            Err(bad("not an absolute path or a supported URL"))
        }
    }

    /// The locator text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn is_local(&self) -> bool {
        self.0.starts_with('/') || self.0.starts_with("file://")
    }
}

/// The mirrors of one host, under `<state dir>/mirrors`.
#[derive(Debug, Clone)]
pub struct MirrorCache {
    root: PathBuf,
    locks: Arc<Mutex<HashMap<String, Arc<Mutex<()>>>>>,
}

fn git(dir: Option<&Path>, local: bool) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.env_clear();
    for keep in ["PATH", "HOME", "SSH_AUTH_SOCK"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    cmd.envs([
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_ASKPASS", "/bin/false"),
        ("GIT_NO_REPLACE_OBJECTS", "1"),
        ("LC_ALL", "C"),
    ]);
    cmd.args([
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
    ]);
    if local {
        cmd.args(["-c", "protocol.file.allow=always"]);
    }
    if let Some(dir) = dir {
        cmd.arg("--git-dir").arg(dir);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn status(mut cmd: tokio::process::Command) -> Result<bool, ServiceError> {
    let child = cmd.status();
    match tokio::time::timeout(GIT_NETWORK_TIMEOUT, child).await {
        Ok(Ok(status)) => Ok(status.success()),
        Ok(Err(_)) => Err(ServiceError::Git {
            detail: "git cannot be run",
        }),
        Err(_) => Ok(false),
    }
}

impl MirrorCache {
    /// The cache under `root` (created on first use, 0700).
    #[must_use]
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            locks: Arc::default(),
        }
    }

    /// The mirror of `locator`, holding `commit`: cloned when missing, fetched when it lacks the
    /// commit. Concurrent callers for one locator wait for each other.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE` when the repository cannot be cloned or
    /// fetched, or does not have the commit after a fetch; `PATCH_CANDIDATE_SERVICE_GIT` when git
    /// cannot run; `PATCH_CANDIDATE_SERVICE_STATE` when the cache cannot be created.
    pub async fn ensure(&self, locator: &Locator, commit: &str) -> Result<PathBuf, ServiceError> {
        let key = snapshot::sha256_bare_hex(locator.as_str().as_bytes());
        let lock = {
            let mut locks = self.locks.lock().await;
            locks.entry(key.clone()).or_default().clone()
        };
        let _held = lock.lock().await;
        let dir = self.root.join(format!("{key}.git"));
        let local = locator.is_local();
        if !dir.is_dir() {
            super::create_private_dir(&self.root)?;
            let tmp = self
                .root
                .join(format!("{key}.tmp-{}", uuid::Uuid::new_v4().simple()));
            let mut clone = git(None, local);
            clone
                .args(["clone", "--mirror", "--quiet", "--no-hardlinks", "--"])
                .arg(locator.as_str())
                .arg(&tmp);
            let cloned = status(clone).await?;
            if !cloned {
                let _ = tokio::fs::remove_dir_all(&tmp).await;
                return Err(ServiceError::Unreachable);
            }
            if tokio::fs::rename(&tmp, &dir).await.is_err() {
                let _ = tokio::fs::remove_dir_all(&tmp).await;
                if !dir.is_dir() {
                    return Err(ServiceError::State {
                        detail: "cannot place the mirror",
                    });
                }
            }
        }
        if has_commit(&dir, commit).await? {
            return Ok(dir);
        }
        let mut fetch = git(Some(&dir), local);
        fetch.args(["fetch", "--quiet", "--prune", "origin"]);
        if !status(fetch).await? || !has_commit(&dir, commit).await? {
            return Err(ServiceError::Unreachable);
        }
        Ok(dir)
    }
}

async fn has_commit(dir: &Path, commit: &str) -> Result<bool, ServiceError> {
    if !snapshot_commit_text(commit) {
        return Ok(false);
    }
    let mut cmd = git(Some(dir), false);
    cmd.args(["cat-file", "-e", &format!("{commit}^{{commit}}")]);
    status(cmd).await
}

fn snapshot_commit_text(commit: &str) -> bool {
    commit.len() == 40
        && commit
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locators_are_absolute_paths_or_known_urls() {
        for ok in [
            "/srv/repo",
            "https://example.invalid/o/r.git",
            "ssh://git@example.invalid/o/r.git",
            "file:///srv/repo",
        ] {
            assert!(Locator::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "repo",
            "../repo",
            "-uhttps://x",
            "--upload-pack=x",
            "https://",
            "ext::sh -c x",
            "/srv/re\npo",
            "git@example.invalid:o/r.git",
        ] {
            assert!(Locator::parse(bad).is_err(), "{bad:?}");
        }
    }
}
