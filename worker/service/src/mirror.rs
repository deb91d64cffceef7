//! The host's bare mirror cache: one `git clone --mirror` per repository locator (a local path or
//! a Git URL), fetched again only when the pinned commit is missing. Snapshots are then read from
//! the mirror's object database at the pinned commit, exactly as `run` reads a local repository.
//!
//! The mirror's directory name is the SHA-256 of the locator, so a locator never becomes a path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::ServiceError;

/// How long one clone or fetch may take.
const GIT_NETWORK_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest accepted locator.
const MAX_LOCATOR_BYTES: usize = 2048;

/// A repository locator: an absolute local path, or a `https://`, `http://`, `git://` or
/// `file://` URL. No option-like, relative or control-character text, and no `ssh://` (it would
/// authenticate with the host's keys).
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
        if text.starts_with("ssh://") {
            // ssh would authenticate with the host's own keys (ssh reads them from the user's
            // passwd home, whatever the environment says): a client could then read any
            // repository those keys open. Refused until the operator can name a key of its own.
            return Err(bad(
                "ssh locators are refused: a mirror never uses the host's keys",
            ));
        }
        let url = ["https://", "http://", "git://", "file://"]
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

    /// The one git transport a clone or fetch of this locator may use.
    fn protocol(&self) -> &'static str {
        if self.0.starts_with('/') || self.0.starts_with("file://") {
            "file"
        } else if self.0.starts_with("https://") {
            "https"
        } else if self.0.starts_with("http://") {
            "http"
        } else {
            "git"
        }
    }
}

/// The mirrors of one host, under `<state dir>/mirrors`.
#[derive(Debug, Clone)]
pub struct MirrorCache {
    root: PathBuf,
    locks: Arc<Mutex<HashMap<String, Arc<Mutex<()>>>>>,
}

/// The launcher's isolated transfer mode ([`snapshot::Git::transfer`]): nothing of the host's
/// environment but `PATH` (no `HOME` or `XDG_CONFIG_HOME`, so no global config, `insteadOf` or
/// credential helper; no `SSH_AUTH_SOCK`), no system config, only the locator's own transport
/// allowed, hooks off. A client chooses the locator, so nothing of the operator's may reach it.
/// The fetch needs nothing of the host's environment: the locators are public or local
/// repositories (no credentials), and git finds the system CA bundle without a variable. The
/// explicit host mode ([`snapshot::Git::host_network`]) is therefore never used here.
fn git(dir: Option<&Path>, protocol: &str) -> snapshot::Git {
    snapshot::Git::transfer(dir, protocol)
}

/// Cancels its launch when dropped: git never outlives the future that waits for it.
struct CancelOnDrop(snapshot::GitCancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs `git` on a blocking thread under [`GIT_NETWORK_TIMEOUT`] (output discarded): its exit
/// status, `false` past the deadline.
async fn status(mut git: snapshot::Git) -> Result<bool, ServiceError> {
    let cancel = snapshot::GitCancel::new();
    git.deadline(GIT_NETWORK_TIMEOUT).cancel_with(&cancel);
    let _cancel = CancelOnDrop(cancel);
    match tokio::task::spawn_blocking(move || git.run(None)).await {
        Ok(Ok(out)) => Ok(out.success()),
        Ok(Err(snapshot::GitLaunchError::Deadline(_))) => Ok(false),
        Ok(Err(_)) | Err(_) => Err(ServiceError::Git {
            detail: "git cannot be run",
        }),
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
        let (_held, dir, cloned) = self.cloned(locator).await?;
        if has_commit(&dir, commit).await? {
            return Ok(dir);
        }
        if cloned {
            return Err(ServiceError::Unreachable);
        }
        fetch(&dir, locator).await?;
        if !has_commit(&dir, commit).await? {
            return Err(ServiceError::Unreachable);
        }
        Ok(dir)
    }

    /// The mirror of `locator`, fetched now, and the commit its branch `branch` points at (a
    /// forge trigger builds its job on the base branch's tip).
    ///
    /// # Errors
    /// As [`MirrorCache::ensure`]; `PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE` also when the
    /// branch does not exist.
    pub async fn fetch_branch(
        &self,
        locator: &Locator,
        branch: &publish::BranchName,
    ) -> Result<(PathBuf, String), ServiceError> {
        let (_held, dir, cloned) = self.cloned(locator).await?;
        if !cloned {
            fetch(&dir, locator).await?;
        }
        let mut cmd = git(Some(&dir), "");
        cmd.args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{}^{{commit}}", branch.as_str()),
        ]);
        // One object id and a newline.
        cmd.capture_stdout(64);
        let out = output(cmd).await?;
        let text = std::str::from_utf8(&out).unwrap_or_default().trim();
        if snapshot_commit_text(text) {
            Ok((dir, text.to_owned()))
        } else {
            Err(ServiceError::Unreachable)
        }
    }

    /// Holds the locator's lock and returns its mirror directory, cloned now when missing
    /// (`true`: cloned by this call, so it is fresh).
    async fn cloned(
        &self,
        locator: &Locator,
    ) -> Result<(tokio::sync::OwnedMutexGuard<()>, PathBuf, bool), ServiceError> {
        let key = vocab::sha256_bare_hex(locator.as_str().as_bytes());
        let lock = {
            let mut locks = self.locks.lock().await;
            Arc::clone(locks.entry(key.clone()).or_default())
        };
        let held = lock.lock_owned().await;
        let dir = self.root.join(format!("{key}.git"));
        if dir.is_dir() {
            return Ok((held, dir, false));
        }
        super::create_private_dir(&self.root)?;
        let tmp = self
            .root
            .join(format!("{key}.tmp-{}", uuid::Uuid::new_v4().simple()));
        let mut clone = git(None, locator.protocol());
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
        Ok((held, dir, true))
    }
}

/// Fetches every ref of the mirror from its locator.
async fn fetch(dir: &Path, locator: &Locator) -> Result<(), ServiceError> {
    let mut fetch = git(Some(dir), locator.protocol());
    fetch.args(["fetch", "--quiet", "--prune", "origin"]);
    if status(fetch).await? {
        Ok(())
    } else {
        Err(ServiceError::Unreachable)
    }
}

/// Runs `git` like [`status`] and returns its stdout when it succeeded (empty otherwise).
async fn output(mut git: snapshot::Git) -> Result<Vec<u8>, ServiceError> {
    let cancel = snapshot::GitCancel::new();
    git.deadline(GIT_NETWORK_TIMEOUT).cancel_with(&cancel);
    let _cancel = CancelOnDrop(cancel);
    match tokio::task::spawn_blocking(move || git.run(None)).await {
        Ok(Ok(out)) if out.success() => Ok(out.stdout),
        Ok(Ok(_) | Err(snapshot::GitLaunchError::Deadline(_))) => Ok(Vec::new()),
        Ok(Err(_)) | Err(_) => Err(ServiceError::Git {
            detail: "git cannot be run",
        }),
    }
}

async fn has_commit(dir: &Path, commit: &str) -> Result<bool, ServiceError> {
    if !snapshot_commit_text(commit) {
        return Ok(false);
    }
    let mut cmd = git(Some(dir), "");
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
            "git://example.invalid/o/r.git",
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
            "ssh://git@example.invalid/o/r.git",
        ] {
            assert!(Locator::parse(bad).is_err(), "{bad:?}");
        }
    }

    fn run_git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// The branch's tip, cloned the first time and fetched again after it moved; a missing
    /// branch is unreachable.
    #[tokio::test]
    async fn a_branch_tip_is_fetched_into_the_mirror() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("a"), "1").unwrap();
        run_git(repo.path(), &["init", "-q", "-b", "main"]);
        run_git(repo.path(), &["add", "-A"]);
        run_git(repo.path(), &["commit", "-qm", "one"]);
        let first = run_git(repo.path(), &["rev-parse", "HEAD"]);
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = MirrorCache::new(cache_dir.path().join("mirrors"));
        let locator = Locator::parse(repo.path().to_str().unwrap()).unwrap();
        let main = publish::BranchName::parse("main").unwrap();
        let (dir, tip) = cache.fetch_branch(&locator, &main).await.unwrap();
        assert_eq!(tip, first);
        std::fs::write(repo.path().join("a"), "2").unwrap();
        run_git(repo.path(), &["commit", "-qam", "two"]);
        let second = run_git(repo.path(), &["rev-parse", "HEAD"]);
        let (again, tip) = cache.fetch_branch(&locator, &main).await.unwrap();
        assert_eq!((again, tip), (dir, second));
        let other = publish::BranchName::parse("release").unwrap();
        assert!(matches!(
            cache.fetch_branch(&locator, &other).await,
            Err(ServiceError::Unreachable)
        ));
    }

    /// r_mirror_keeps_the_hosts_home: the mirror's git gets nothing of the host's environment
    /// but `PATH` (no `HOME`, so no global config, `insteadOf` or credential helper; no
    /// `SSH_AUTH_SOCK`), exactly the locator's transport, and no credential helper.
    #[test]
    fn the_mirror_git_keeps_nothing_of_the_hosts_environment() {
        let locator = Locator::parse("https://example.invalid/o/r.git").unwrap();
        let cmd = git(None, locator.protocol());
        let std = cmd.as_command();
        let envs: std::collections::BTreeMap<String, Option<String>> = std
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        for absent in [
            "HOME",
            "SSH_AUTH_SOCK",
            "XDG_CONFIG_HOME",
            "GIT_SSH_COMMAND",
        ] {
            assert!(
                !envs.contains_key(absent),
                "{absent} reaches the mirror's git"
            );
        }
        assert_eq!(envs["GIT_CONFIG_GLOBAL"].as_deref(), Some("/dev/null"));
        assert_eq!(envs["GIT_CONFIG_NOSYSTEM"].as_deref(), Some("1"));
        assert_eq!(envs["GIT_ALLOW_PROTOCOL"].as_deref(), Some("https"));
        let args: Vec<String> = std
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.iter().any(|a| a == "credential.helper="));
        assert!(!args.iter().any(|a| a.starts_with("protocol.file.allow")));
        assert_eq!(Locator::parse("/srv/r").unwrap().protocol(), "file");
        assert_eq!(Locator::parse("file:///srv/r").unwrap().protocol(), "file");
        assert_eq!(Locator::parse("http://h/r").unwrap().protocol(), "http");
        assert_eq!(Locator::parse("git://h/r").unwrap().protocol(), "git");
    }

    /// The global config of whoever runs the host never applies: a `HOME` whose `.gitconfig`
    /// rewrites a URL the client names (`insteadOf`) to a repository that exists changes
    /// nothing. The control run shows the same command with the host's config would succeed.
    #[tokio::test]
    async fn a_hosts_insteadof_rewrite_does_not_reach_a_clients_locator() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("source.git");
        let init = std::process::Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&source)
            .status()
            .unwrap();
        assert!(init.success());
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            format!(
                "[url \"file://{}\"]\n\tinsteadOf = file:///nonexistent/client.git\n",
                source.display()
            ),
        )
        .unwrap();
        let run = |global: Option<&Path>| {
            let mut cmd = git(None, "file");
            cmd.env("HOME", &home);
            if let Some(global) = global {
                cmd.env("GIT_CONFIG_GLOBAL", global);
            }
            cmd.args(["ls-remote", "--", "file:///nonexistent/client.git"]);
            status(cmd)
        };
        // Control: with the host's global config the rewrite applies and the listing succeeds.
        assert!(run(Some(&home.join(".gitconfig"))).await.unwrap());
        // The builder's own environment: the rewrite never applies.
        assert!(!run(None).await.unwrap());
    }
}
